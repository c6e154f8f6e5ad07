from django.urls import include, path

urlpatterns = [path("ops/riverboat/", include("riverboat.contrib.django.urls"))]
